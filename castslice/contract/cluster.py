"""Reading the cluster for `castslice doctor`: plain JSON over the kubernetes client's connection.

The checks compare objects with the configuration CastSlice generates, so they
read the API's own JSON rather than the client's models (whose field names
and defaults differ from what `kubectl get -o yaml` shows).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from castslice.contract import Manifest

if TYPE_CHECKING:
    import kubernetes.client

Query = Sequence[tuple[str, str]]

# Listing in pages keeps the memory of one answer bounded on large clusters.
_PAGE_SIZE = "500"


class Unreachable(Exception):
    """The API server cannot be reached, or refuses who we are; nothing can be checked."""


class ApiError(Exception):
    """The API server answered a request with an error status; `message` is its own words."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message


class Cluster:
    """One API server, reached with the credentials of a kubeconfig context."""

    def __init__(self, api: kubernetes.client.ApiClient, timeout: float = 10.0) -> None:
        self.api = api
        self.server: str = api.configuration.host
        self.timeout = timeout

    def get(self, path: str, query: Query = ()) -> Manifest:
        return _json(self.request("GET", path, query))

    def get_text(self, path: str, query: Query = ()) -> str:
        return self.request("GET", path, query, accept="text/plain").decode(errors="replace")

    def list(self, path: str, query: Query = ()) -> Iterator[Manifest]:
        """Every item of a collection, page by page."""
        token = ""
        while True:
            page_query = [*query, ("limit", _PAGE_SIZE)]
            if token:
                page_query.append(("continue", token))
            page = self.get(path, page_query)
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def dry_run_create(self, path: str, body: Manifest) -> Manifest:
        """Create `body` with `dryRun=All`: admission runs, nothing is stored."""
        return _json(self.request("POST", path, [("dryRun", "All")], body=body))

    def request(
        self,
        method: str,
        path: str,
        query: Query = (),
        *,
        body: Manifest | None = None,
        accept: str = "application/json",
    ) -> bytes:
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = "application/json"
        serialized = self.api.param_serialize(
            method,
            path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        # Loaded here, where a client already is: the webhook imports this module with its
        # backends, and the client's import would double its start.
        import kubernetes.client
        import urllib3

        try:
            response = self.api.call_api(*serialized, _request_timeout=self.timeout)
            data = response.read()
        except kubernetes.client.ApiException as error:
            # The REST layer turns TLS failures into status 0.
            raise Unreachable(f"{self.server}: {connection_problem(error.reason)}") from None
        except urllib3.exceptions.HTTPError as error:
            # MaxRetryError wraps what went wrong on the last attempt.
            reason = getattr(error, "reason", None) or error
            raise Unreachable(f"{self.server}: {connection_problem(reason)}") from None
        if response.status == 401:
            raise Unreachable(
                f"{self.server} rejected the credentials (401 Unauthorized): "
                "log in again or pick another --context"
            )
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, _status_message(response.status, data))
        return data


def _json(data: bytes) -> Manifest:
    try:
        document = json.loads(data)
    except ValueError:
        raise ApiError(200, "the answer is not JSON") from None
    if not isinstance(document, dict):
        raise ApiError(200, "the answer is not a JSON object")
    return document


def _status_message(status: int, data: bytes) -> str:
    """The `message` of the API server's Status object, else the start of the body."""
    try:
        message = json.loads(data).get("message")
    except (ValueError, AttributeError):
        message = None
    if isinstance(message, str) and message:
        return message
    return data[:200].decode(errors="replace").strip() or f"HTTP {status}"


# What a failed connection's error text says -> what a user reads.
_CONNECTION_PROBLEMS = (
    ("connection refused", "connection refused"),
    ("timed out", "no answer (timed out)"),
    ("name or service not known", "its host name does not resolve"),
    ("temporary failure in name resolution", "its host name does not resolve"),
)
_TLS_FAILURE = re.compile(r"certificate verify failed: ([^()'\]\"]+)")


def connection_problem(error: object) -> str:
    """A short reason for a failed connection, from the error or its text."""
    text = str(error)
    tls = _TLS_FAILURE.search(text)
    if tls:
        return f"its TLS certificate is not trusted ({tls.group(1).strip()})"
    for needle, problem in _CONNECTION_PROBLEMS:
        if needle in text.lower():
            return problem
    return _gist(text)


def _gist(text: object) -> str:
    """The last line of an error (the REST layer prefixes the exception type), shortened."""
    lines = str(text).strip().splitlines()
    return lines[-1][:200] if lines else "unknown error"
