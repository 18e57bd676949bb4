"""`castslice doctor`: check a live installation, one line per check with ✓/✗ and the fix.

Exit status: 0 every check passed, 1 a check failed, 2 the cluster or the
configuration could not be used (the message says why).
"""

from __future__ import annotations

import argparse
import os
import sys

import kubernetes.client
import kubernetes.config
import yaml

from castslice import __version__
from castslice.backends.tools import node_checks_for
from castslice.cli import EXIT_OK, EXIT_PROBLEM, CommandError
from castslice.cli.flags import config_from
from castslice.contract.cluster import ApiError, Cluster, Unreachable
from castslice.contract.findings import Result, summary, symbols_for, text_line, to_json
from castslice.inspect.doctor import run_checks
from castslice.render.webhook_configuration import RegistrationError
from castslice.settings.config import Config

_DEFAULT_TIMEOUT = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="output format"
    )
    parser.add_argument(
        "--name",
        default="castslice",
        help="name of the MutatingWebhookConfiguration (default: castslice)",
    )
    parser.add_argument(
        "--namespace",
        default="default",
        help="namespace for the dry-run Pods; it must not be excluded (default: default)",
    )


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of every command that reads a live cluster: which one, and how patiently."""
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)",
    )
    parser.add_argument("--context", metavar="NAME", help="kubeconfig context to use")
    parser.add_argument(
        "--timeout",
        type=float,
        default=_DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"per request to the API server (default: {_DEFAULT_TIMEOUT:g})",
    )


def cluster_from(args: argparse.Namespace, command: str) -> Cluster:
    """The cluster `add_cluster_arguments`' flags name; CommandError when it is unusable."""
    if not args.timeout > 0:
        raise CommandError(f"--timeout must be a positive number of seconds, not {args.timeout:g}")
    return Cluster(connect(args.kubeconfig, args.context, command), timeout=args.timeout)


def run(args: argparse.Namespace) -> int:
    config = config_from(args)
    cluster = cluster_from(args, "doctor")
    api = cluster.api
    try:
        version = _server_version(cluster)
        results = run_checks(cluster, config, args.name, args.namespace)
    except Unreachable as error:
        raise CommandError(f"cannot use the API server at {error}") from None
    except RegistrationError as error:
        raise CommandError(f"cannot generate the expected registration: {error}") from None
    finally:
        api.close()
    if args.output == "json":
        context = {"server": cluster.server, "kubernetes": version, "backend": config.backend}
        print(to_json(results, context))
    else:
        _print_text(cluster.server, version, config, results)
    return EXIT_PROBLEM if any(not result.ok for result in results) else EXIT_OK


def connect(
    kubeconfig: str | None, context: str | None, command: str = "doctor"
) -> kubernetes.client.ApiClient:
    """A client for the kubeconfig (or in-cluster) credentials; CommandError when unusable."""
    configuration = kubernetes.client.Configuration()
    in_cluster = (
        kubeconfig is None
        and context is None
        and "KUBECONFIG" not in os.environ
        and not os.path.exists(os.path.expanduser("~/.kube/config"))
        and "KUBERNETES_SERVICE_HOST" in os.environ
    )
    source = "the in-cluster service account" if in_cluster else _kubeconfig_name(kubeconfig)
    if not in_cluster and not any(os.path.isfile(path) for path in _kubeconfig_files(kubeconfig)):
        # The client would say "Invalid kube-config file" of a file that is not there.
        hint = (
            ""
            if kubeconfig or os.environ.get("KUBECONFIG")
            else " (set KUBECONFIG or pass --kubeconfig)"
        )
        raise CommandError(f"cannot use {source}: there is no such file{hint}")
    try:
        if in_cluster:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        else:
            kubernetes.config.load_kube_config(
                config_file=kubeconfig,
                context=context,
                client_configuration=configuration,
                # Never write refreshed credentials back: doctor and report change nothing.
                persist_config=False,
            )
    except (kubernetes.config.ConfigException, OSError, yaml.YAMLError, ValueError) as error:
        raise CommandError(f"cannot use {source}: {_one_line(error)}") from None
    except (TypeError, KeyError, AttributeError):
        # The client's loader trips over YAML of the wrong shape instead of saying so.
        raise CommandError(
            f"cannot use {source}: it is not a kubeconfig (clusters, users and contexts)"
        ) from None
    # One retry rides out a blip; more would only delay the message when the server is down.
    configuration.retries = 1
    api = kubernetes.client.ApiClient(configuration)
    # So the API server's audit log tells the command's reads and dry runs apart.
    api.user_agent = f"castslice-{command}/{__version__}"
    return api


def _server_version(cluster: Cluster) -> str:
    try:
        return str(cluster.get("/version").get("gitVersion") or "unknown version")
    except ApiError:
        # Some clusters hide /version from ordinary users; the checks can still run.
        return "version not readable"


def _print_text(server: str, version: str, config: Config, results: list[Result]) -> None:
    symbols = symbols_for(sys.stdout.encoding)
    backend = node_checks_for(config).describe()
    print(f"castslice doctor: {server} (Kubernetes {version}), {backend}")
    for result in results:
        print(text_line(result, symbols))
    print(summary(results))


def _kubeconfig_files(path: str | None) -> list[str]:
    """The files the client reads: --kubeconfig, else KUBECONFIG's list, else ~/.kube/config."""
    if path:
        return [path]
    listed = [item for item in os.environ.get("KUBECONFIG", "").split(os.pathsep) if item]
    return [os.path.expanduser(item) for item in listed or ["~/.kube/config"]]


def _kubeconfig_name(path: str | None) -> str:
    if path:
        return f"kubeconfig {path}"
    return f"kubeconfig {os.environ.get('KUBECONFIG') or '~/.kube/config'}"


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:300] or type(error).__name__
