"""What the functions publish for people to read: the alert topic's messages and Slack's custom notifications.

The environment's alert topic is delivered by e-mail and, when the stack has a Slack channel, to AWS
Chatbot (components/alerts), which subscribes over HTTPS and shows only AWS services' own notifications
and custom notifications (`chatbot_notification`); plain text published there never reaches Slack.
`publish_alert` therefore publishes per protocol: SNS Publish with MessageStructure "json", a required
"default" key and one key per protocol (https://docs.aws.amazon.com/sns/latest/api/API_Publish.html), the
text for "default" and "email", the custom notification for "https".

Publish also rejects the whole message (InvalidParameter) when its Subject breaks SNS's rule: "ASCII text
that begins with a letter, number, or punctuation mark; must not include line breaks or control
characters; and must be less than 100 characters long" (API_Publish, and botocore's sns model, Publish's
Subject). An alert whose subject carried a '×' or a line break would be lost, so `sns_subject` makes a
valid subject of any text.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Mapping, Sequence

SUBJECT_MAX = 99  # "less than 100 characters"
FALLBACK_SUBJECT = "mlfleet alert"

# Characters without an ASCII decomposition (NFKD), spelled the way a reader would type them. "≠" is
# here because NFKD makes it "=" and an overlay, which would read as its opposite once the overlay goes.
_SPELLED = {
    "×": "x", "÷": "/", "⁄": "/", "—": "-", "–": "-", "‐": "-", "−": "-", "≥": ">=", "≤": "<=", "≠": "!=",
    "≈": "~", "±": "+/-", "→": "->", "←": "<-", "⇒": "=>", "‘": "'", "’": "'", "‚": ",", "“": '"', "”": '"',
    "„": '"', "«": '"', "»": '"', "•": "*", "·": ".", "€": "EUR", "£": "GBP", "ß": "ss", "æ": "ae",
    "Æ": "AE", "ø": "o", "Ø": "O", "œ": "oe", "Œ": "OE", "ł": "l", "Ł": "L", "đ": "d", "Đ": "D", "ı": "i",
}


def _accent(char: str) -> bool:
    """A combining accent (U+0300-U+036F) that only marks its letter, not an overlay that negates it."""
    return "\u0300" <= char <= "\u036f" and not "\u0334" <= char <= "\u0338"


def _ascii(char: str, decompose: bool = True) -> str:
    """One character as printable ASCII: itself, its spelling, its compatibility decomposition (NFKD: "é"
    is "e", "ﬁ" is "fi") without accents, a space for any space, line break or control character, nothing
    for an invisible format character, else '?'."""
    if " " <= char <= "~":
        return char
    if char in _SPELLED:
        return _SPELLED[char]
    category = unicodedata.category(char)
    if char.isspace() or category in ("Cc", "Zl", "Zp", "Zs"):
        return " "
    if category == "Cf" or _accent(char):
        return ""
    parts = unicodedata.normalize("NFKD", char) if decompose else char
    if parts != char:
        spelled = "".join(_ascii(part, decompose=False) for part in parts)
        return spelled if spelled.strip("?") else "?"
    return "?"


def sns_subject(text: str) -> str:
    """`text` as a Subject SNS Publish accepts: printable ASCII (transliterated, else '?'), line breaks and
    control characters made spaces and runs of spaces one, no leading space (so it begins with a letter,
    number or punctuation mark), and at most SUBJECT_MAX characters (a longer one ends in '...')."""
    subject = " ".join("".join(_ascii(char) for char in unicodedata.normalize("NFC", text)).split())
    if len(subject) > SUBJECT_MAX:
        subject = subject[:SUBJECT_MAX - 3].rstrip() + "..."
    return subject or FALLBACK_SUBJECT


def chatbot_notification(title: str, description: str, *, notification_id: str | None = None,
                         text_type: str | None = None, next_steps: Sequence[str] = (), event_type: str | None = None,
                         additional_context: Mapping[str, str] | None = None) -> str:
    """An AWS Chatbot custom notification, the only form of a message that is not an AWS service's own
    notification that Chatbot shows in Slack (https://docs.aws.amazon.com/chatbot/latest/adminguide/custom-notifs.html:
    version "1.0", source "custom", content with a title and description; the rest optional). The
    metadata's summary is the title."""
    content: dict = {"title": title, "description": description}
    if text_type is not None:
        content["textType"] = text_type
    if next_steps:
        content["nextSteps"] = list(next_steps)
    metadata: dict = {"summary": title}
    if event_type is not None:
        metadata["eventType"] = event_type
    if additional_context is not None:
        metadata["additionalContext"] = dict(additional_context)
    notification: dict = {"version": "1.0", "source": "custom", "content": content, "metadata": metadata}
    if notification_id is not None:
        notification["id"] = notification_id
    return json.dumps(notification, sort_keys=True)


def publish_alert(sns, topic_arn: str, subject: str, message: str) -> None:
    """Publish to an alert topic: the text for e-mail (and any other protocol), a custom notification for
    Chatbot's HTTPS subscription, under a subject SNS accepts whatever `subject` holds."""
    sns.publish(TopicArn=topic_arn, Subject=sns_subject(subject), MessageStructure="json",
                Message=json.dumps({"default": message, "email": message,
                                    "https": chatbot_notification(subject, message)}))
