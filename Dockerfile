FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY docsrv ./docsrv
COPY snapshots ./snapshots
RUN pip install --no-cache-dir .
# Mount the snapshot to serve at /snapshot.
VOLUME ["/snapshot"]
EXPOSE 8000
USER nobody
CMD ["docsrv", "serve", "--snapshot", "/snapshot", "--host", "0.0.0.0", "--port", "8000"]
