"""The floor plus a fixed piece of pure-Python work: what a microsecond costs.

bench.profile times `busy_work` alone and serves this file next to the floor;
the two figures together give the exchange rate between time spent in a handler
and the server's throughput, measured in the same run as CastSlice's layers.
"""

import flask
import functions_framework

from bench.floor import main as floor

LOOPS = 400


def busy_work() -> int:
    total = 0
    for number in range(LOOPS):
        total += number
    return total


@functions_framework.http
def mutate(request: flask.Request) -> flask.Response:
    busy_work()
    return floor.mutate(request)
