FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock
COPY docsrv ./docsrv
COPY snapshots ./snapshots
RUN pip install --no-cache-dir --no-deps .
# Mount the snapshot to serve at /snapshot (or pull one: deploy/kubernetes/). Every setting of
# `docsrv serve` is also its DOCSRV_* environment variable.
VOLUME ["/snapshot"]
ENV DOCSRV_SNAPSHOT=/snapshot DOCSRV_HOST=0.0.0.0 DOCSRV_PORT=8000
EXPOSE 8000
USER nobody
CMD ["docsrv", "serve"]
