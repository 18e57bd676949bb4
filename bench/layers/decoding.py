"""Routing plus decoding the review, then a constant answer."""

import functions_framework

from bench.floor.main import ANSWER
from castslice.config import load_config
from castslice.review import decode_review
from castslice.webhook import Reply, Webhook


class DecodingOnly(Webhook):
    def answer(self, body: bytes) -> Reply:
        decode_review(body)
        return Reply(200, ANSWER)


_webhook = DecodingOnly(load_config({}))


@functions_framework.http
def mutate(request):
    return _webhook.serve(request)
