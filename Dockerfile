# CastSlice admission webhook: the function served by functions-framework.
#
#   docker build -t castslice .                                  # the webhook
#   docker build --target report -t castslice-report .           # report --serve
#   docker run --rm -p 8080:8080 castslice
#
# Cloud Run and Knative run it as it is (they set PORT and terminate TLS).
# The in-cluster Deployment runs the same image with
# `gunicorn --config=python:castslice.serve.tls`, which terminates TLS itself.
FROM python:3.11-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /app

# Dependencies first: this layer is reused until requirements.txt changes.
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt

COPY main.py ./
COPY castslice/ ./castslice/
# Compiled once here: the process cannot write bytecode at run time, and compiling
# on every start would add to each cold start.
RUN python -m compileall -q main.py castslice/

# A numeric, unprivileged user: Kubernetes can only verify runAsNonRoot for a numeric UID.
# Its home holds gunicorn's control socket (~/.gunicorn) where the filesystem is writable.
RUN groupadd --system --gid 10001 castslice \
 && useradd --system --uid 10001 --gid 10001 --create-home --home-dir /home/castslice \
      --shell /usr/sbin/nologin castslice

# `castslice report --serve` (the chart's reportExporter): the same files and user, plus the
# Kubernetes client the webhook never loads.
#   docker build --target report -t castslice-report .
FROM base AS report
COPY requirements-report.txt ./
RUN pip install --no-cache-dir -r requirements-report.txt
USER 10001:10001
EXPOSE 9100
CMD ["python", "-m", "castslice", "report", "--serve", "9100", "--address", "0.0.0.0"]

# The webhook, the last stage: what `docker build .` builds.
FROM base AS webhook
USER 10001:10001

# functions-framework reads PORT (Cloud Run and Knative set it) and listens on 0.0.0.0.
ENV PORT=8080
EXPOSE 8080

# functions-framework's ASGI server (uvicorn's worker under gunicorn): an `aio` target is
# served by it with no other flag, the command `gcloud run deploy --source .
# --function=mutate_asgi` runs too. About two thirds of the CPU per review of the Flask
# server's target `mutate` (docs/performance.md#the-two-servers).
CMD ["functions-framework", "--target=mutate_asgi", "--source=main.py"]
