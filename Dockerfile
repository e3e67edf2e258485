# syntax=docker/dockerfile:1
# stockguard: one image for every replica. Multi-stage: the build stage compiles a
# static binary (cgo for SQLite, linked statically); the final stage is scratch
# with only that binary, CA certificates and an unprivileged user to run as.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=1 go build -trimpath \
      -tags 'osusergo,netgo,sqlite_omit_load_extension' \
      -ldflags '-s -w -linkmode external -extldflags "-static"' \
      -o /out/stockguard ./cmd/stockguard \
 && echo 'stockguard:x:65532:65532::/data:/sbin/nologin' > /out/passwd \
 && echo 'stockguard:x:65532:' > /out/group \
 && mkdir -p /out/data

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /out/passwd /out/group /etc/
COPY --from=build --chown=65532:65532 /out/data /data
COPY --from=build /out/stockguard /usr/local/bin/stockguard
USER 65532:65532
WORKDIR /data
EXPOSE 8080
ENV STOCKGUARD_ADDR=:8080 STOCKGUARD_LOG_FORMAT=json
ENTRYPOINT ["/usr/local/bin/stockguard"]
CMD ["serve"]
