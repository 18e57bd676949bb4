"""The API server's rules for names, label keys and values, and the numbers CastSlice reads.

Every module that validates a Kubernetes name asks here, so a rule is written once.
"""

from __future__ import annotations

import re

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# The name part of a qualified name (label keys, extended resources).
QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
MAX_SUBDOMAIN_LENGTH = 253
MAX_LABEL_LENGTH = 63
# A device capacity's name (resource.k8s.io/v1 QualifiedName, as for device attributes): a C
# identifier of at most 32 characters, optionally after a DNS subdomain and '/'.
CAPACITY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
MAX_CAPACITY_DOMAIN_LENGTH = 63
# The characters a URL path segment carries unescaped (RFC 3986's unreserved set).
PATH_TOKEN = re.compile(r"[A-Za-z0-9._~-]+")
# A token shorter than this can be guessed; it is the only thing keeping the URL private.
MIN_PATH_TOKEN_LENGTH = 16


def is_dns_subdomain(text: str) -> bool:
    return len(text) <= MAX_SUBDOMAIN_LENGTH and DNS_SUBDOMAIN.fullmatch(text) is not None


def is_dns_label(text: str) -> bool:
    return DNS_LABEL.fullmatch(text) is not None


def is_path_token(text: str) -> bool:
    return len(text) >= MIN_PATH_TOKEN_LENGTH and PATH_TOKEN.fullmatch(text) is not None


def extended_resource_problem(name: str) -> str | None:
    """Why `name` cannot be a Kubernetes extended resource, or None when it can.

    Mirrors the API server's rules: a qualified name `domain/name` outside the
    kubernetes.io domain, usable behind the `requests.` quota prefix.
    """
    domain, slash, local = name.partition("/")
    if not slash:
        return "it needs a domain prefix, as in example.com/gpu"
    if not is_dns_subdomain(domain):
        return f"the prefix {domain!r} is not a lowercase DNS subdomain"
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "the kubernetes.io domain is reserved for native resources"
    if len(local) > MAX_LABEL_LENGTH or not QUALIFIED_NAME.fullmatch(local):
        return (
            f"the name {local!r} must be 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def label_key_problem(key: str) -> str | None:
    """Why `key` cannot be a label key, or None when it can."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or not is_dns_subdomain(prefix)):
        return "its prefix must be a lowercase DNS subdomain"
    if not name or len(name) > MAX_LABEL_LENGTH or not QUALIFIED_NAME.fullmatch(name):
        return (
            "its name must be 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return None


def is_label_value(value: str) -> bool:
    return len(value) <= MAX_LABEL_LENGTH and LABEL_VALUE.fullmatch(value) is not None


def is_capacity_name(name: str) -> bool:
    domain, slash, local = name.rpartition("/")
    if slash and (len(domain) > MAX_CAPACITY_DOMAIN_LENGTH or not is_dns_subdomain(domain)):
        return False
    return CAPACITY_NAME.fullmatch(local) is not None


def parse_bounded_int(text: str, upper: int) -> int | None:
    """The value of `text` if it is ASCII digits only and from 1 to `upper`, else None."""
    if not text.isascii() or not text.isdigit():
        return None
    # Bounding the length first keeps int() away from huge digit strings.
    digits = text.lstrip("0")
    if not digits or len(digits) > len(str(upper)):
        return None
    number = int(digits)
    return number if number <= upper else None
