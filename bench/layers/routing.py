"""CastSlice's HTTP layer (routing, limits, reading the body) around a constant answer."""

import functions_framework

from bench.floor.main import ANSWER
from castslice.config import load_config
from castslice.webhook import Reply, Webhook


class RoutingOnly(Webhook):
    def answer(self, body: bytes) -> Reply:
        return Reply(200, ANSWER)


_webhook = RoutingOnly(load_config({}))


@functions_framework.http
def mutate(request):
    return _webhook.serve(request)
