# syntax=docker/dockerfile:1
# opsbot in a container: a static binary on a minimal base, as a non-root user.
#   docker build -t opsbot .
#   chgrp 65532 /etc/opsbot /etc/opsbot/opsbot.yaml /etc/opsbot/id_ed25519
#   docker run -d --name opsbot -v /etc/opsbot:/etc/opsbot:ro -v opsbot-data:/var/lib/opsbot \
#     --env-file /etc/opsbot/env -p 127.0.0.1:9090:9090 opsbot
# The files as README "Point it at a real host" says, with group 65532 (the
# image's user) for opsbot: /etc/opsbot 0750, opsbot.yaml and id_ed25519 0640
# root:65532, known_hosts 0644 root:root, env 0600 root:root (read by docker).
#   docker stop -t 70 opsbot     # longer than limits.shutdown_grace (60 s)
# The config's http.listen must be 0.0.0.0:9090 (or the port published) for
# the HEALTHCHECK and Prometheus to reach it.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
ARG REVISION=""
RUN CGO_ENABLED=0 go build -tags goolm -trimpath \
	-ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" \
	-o /out/opsbot ./cmd/opsbot \
	&& mkdir -p /out/state/tmp

FROM debian:bookworm-slim AS certs
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/*

FROM scratch
COPY --from=certs /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/opsbot /usr/local/bin/opsbot
# A non-root user (uid 65532) owning the state directory.
COPY --from=build --chown=65532:65532 /out/state /var/lib/opsbot
USER 65532:65532
ENV HOME=/var/lib/opsbot TMPDIR=/var/lib/opsbot/tmp
WORKDIR /var/lib/opsbot
VOLUME ["/var/lib/opsbot"]
EXPOSE 9090
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
	CMD ["/usr/local/bin/opsbot", "health", "--url", "http://127.0.0.1:9090/healthz"]
ENTRYPOINT ["opsbot"]
CMD ["serve", "--config", "/etc/opsbot/opsbot.yaml"]
