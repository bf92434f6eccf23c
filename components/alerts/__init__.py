from .slack import SlackChannel, SlackChannelArgs
from .topic import PUBLISHING_SERVICES, AlertTopic, AlertTopicArgs

__all__ = ["PUBLISHING_SERVICES", "AlertTopic", "AlertTopicArgs", "SlackChannel", "SlackChannelArgs"]
