"""Credentials never leave through a URL: userinfo and token-like query parameters are redacted wherever a
URL is printed (errors, log lines) or stored (an event's error, the agent's state in the inbox).

A URL setting may carry them on purpose: `claude_base_url = "http://user:pass@proxy"` is how a proxy that
wants basic auth is reached. The libraries that send the request log its full URL (httpx at INFO, the
Anthropic client at DEBUG), so their loggers get a filter too.
"""

from __future__ import annotations

import logging
import re
import urllib.parse

HIDDEN = "***"
# Parameter names that carry a credential: api_key, apiKey, access_token, X-Amz-Signature, sig, password...
_SECRET_NAME = re.compile(r"(token|key|secret|passw|pwd|auth|sig|credential|session)", re.IGNORECASE)
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")
_TRAILING = ".,;:!?)"  # punctuation after a URL in prose, not part of it
# Loggers of the libraries the agents and channels send through, which log the URL of each request.
LIBRARY_LOGGERS = ("httpx", "httpx2", "httpcore", "anthropic", "anthropic._base_client", "urllib3.connectionpool")


def redact_url(url: str) -> str:
    """The URL with its userinfo replaced by *** and the values of token-like query parameters hidden."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # not parseable as a URL (an unbalanced [ in the host): show nothing of it
        return HIDDEN
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{HIDDEN}@{netloc.rpartition('@')[2]}"
    return urllib.parse.urlunsplit(parts._replace(
        netloc=netloc, query=_redact_pairs(parts.query), fragment=_redact_pairs(parts.fragment)))


def _redact_pairs(text: str) -> str:
    """name=value&... with the values of credential-like names hidden; the rest kept byte for byte."""
    if "=" not in text:
        return text
    pairs = []
    for pair in text.split("&"):
        name, equals, _value = pair.partition("=")
        pairs.append(f"{name}={HIDDEN}" if equals and _SECRET_NAME.search(urllib.parse.unquote(name)) else pair)
    return "&".join(pairs)


def redact_urls(text: str) -> str:
    """Every URL in a free text (an error message, a log line) redacted."""
    if "://" not in text:
        return text
    return _URL.sub(_redact_match, text)


def _redact_match(match: re.Match[str]) -> str:
    url = match.group(0)
    kept = url.rstrip(_TRAILING)
    return redact_url(kept) + url[len(kept):]


class RedactUrls(logging.Filter):
    """Rewrites a log record so that any URL in its message is redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_urls(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def install_log_redaction(*loggers: logging.Logger | logging.Handler) -> None:
    """Add the filter to the libraries' loggers (and to any given logger or handler), once each.

    A logger's filter only sees records made by that very logger, which is where these libraries log
    their requests; a handler's filter sees everything that handler writes."""
    targets: list[logging.Logger | logging.Handler] = [logging.getLogger(name) for name in LIBRARY_LOGGERS]
    for target in [*targets, *loggers]:
        if not any(isinstance(existing, RedactUrls) for existing in target.filters):
            target.addFilter(RedactUrls())
