from .python_function import PythonFunction, PythonFunctionArgs, function_name, package_files, policy_document

__all__ = ["PythonFunction", "PythonFunctionArgs", "function_name", "package_files", "policy_document"]
