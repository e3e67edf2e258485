# syntax=docker/dockerfile:1
# stockguard: one image for every replica. Multi-stage: the build stage compiles a
# static binary (pure Go, SQLite included); the service stage is scratch
# with only that binary, CA certificates and an unprivileged user to run as. The
# loadtest stage holds the load generator the same way.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/loadtest ./loadtest
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/stockguard ./cmd/stockguard \
 && echo 'stockguard:x:65532:65532::/data:/sbin/nologin' > /out/passwd \
 && echo 'stockguard:x:65532:' > /out/group \
 && mkdir -p /out/data

# The load generator (docker-compose.yml's loadtest service): --target loadtest.
FROM scratch AS loadtest
COPY --from=build /out/passwd /out/group /etc/
COPY --from=build /out/loadtest /usr/local/bin/loadtest
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/loadtest"]

# The service, the default target.
FROM scratch AS service
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
