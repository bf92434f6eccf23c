"""Code shared by every mlfleet Lambda: AWS clients, structured logs, settings, the instance catalog.

Packaged next to each function (see components/functions), so it must import nothing outside the
standard library, boto3 and this folder.
"""
