# ctxgate: one image for `ctxgate serve` and `ctxgate worker`.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    CTXGATE_HOST=0.0.0.0 CTXGATE_PORT=8080 CTXGATE_DATA_DIR=/data \
    CTXGATE_CONFIG=/app/config/gateway.yaml
WORKDIR /app
# CPU PyTorch first and pinned, so sentence-transformers does not pull a CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY config ./config
RUN pip install . && useradd --system --uid 10001 ctxgate && mkdir /data && chown ctxgate /data
USER ctxgate
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s CMD python -c "import urllib.request,os;urllib.request.urlopen(f'http://127.0.0.1:{os.environ[\"CTXGATE_PORT\"]}/healthz')"
ENTRYPOINT ["ctxgate"]
CMD ["serve"]
