# turnstile in a container: `docker build -t turnstile --build-arg TURNSTILE_COMMIT=$(git rev-parse --short=12 HEAD) .`
# then `docker run -p 8686:8686 -v turnstile-data:/data turnstile` (docs/deploy.md).

# --- build: the release binary (the same command as the README's, one crate) ---
FROM rust:1.95-bookworm AS build
WORKDIR /src
# `.git` is not sent to the build (.dockerignore): the commit `turnstile --version` prints
# comes from this argument.
ARG TURNSTILE_COMMIT=unknown
ENV TURNSTILE_COMMIT=${TURNSTILE_COMMIT}
COPY . .
RUN cargo build --release --locked -p turnstile \
    && install -m 0755 target/release/turnstile /usr/local/bin/turnstile

# --- run: Debian slim, a non-root user, the data directory a volume ---
FROM debian:bookworm-slim
# curl for the HEALTHCHECK; ca-certificates for HTTPS upstreams and rediss:// URLs.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 turnstile \
    && useradd --system --uid 10001 --gid turnstile --home-dir /data --shell /usr/sbin/nologin turnstile \
    && mkdir -p /data \
    && chown turnstile:turnstile /data
COPY --from=build /usr/local/bin/turnstile /usr/local/bin/turnstile
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8686
# Liveness: /healthz answers 200 while the process serves (readiness is /readyz).
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["curl", "--fail", "--silent", "--max-time", "2", "http://127.0.0.1:8686/healthz"]
ENTRYPOINT ["/usr/local/bin/turnstile"]
CMD ["serve", "--listen", "0.0.0.0:8686", "--data", "/data"]
