# stockguard: one image for every replica. Multi-stage: the build stage compiles
# static binaries (pure Go, SQLite included); the service stage is scratch with
# only the server, CA certificates and an unprivileged user to run as. /keys,
# owned by that user in the service and demo images, is where compose's
# bootstrap writes the demo client's key and the demo reads it: a new volume
# mounted there takes the image's owner. The demo
# and loadtest stages hold the demo runner and the load generator the same way.
# No "# syntax=" line: it would make BuildKit pull a frontend image, and the
# build must work where no registry is reachable.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum go.work go.work.sum ./
COPY pkg/lock/go.mod pkg/lock/go.sum ./pkg/lock/
# pkg/client requires nothing, so it has no go.sum.
COPY pkg/client/go.mod ./pkg/client/
RUN go mod download
COPY . .
# One RUN for the three binaries: a layer fewer to store on every build.
RUN CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/stockguard ./cmd/stockguard \
 && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/loadtest ./loadtest \
 && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o /out/demo ./cmd/demo \
 && echo 'stockguard:x:65532:65532::/data:/sbin/nologin' > /out/passwd \
 && echo 'stockguard:x:65532:' > /out/group \
 && cp /etc/ssl/certs/ca-certificates.crt /out/ \
 && mkdir -p /out/data /out/keys \
 && go clean -cache -modcache
# (The caches cleaned above: this stage is only a source of /out, and a smaller
# one is quicker to copy from on storage drivers without copy-on-write.)

# What the images below take from the build stage, in one small image: each
# "COPY --from" of the large build stage costs a copy of all of it on some
# storage drivers (vfs), so it is copied once, here.
FROM scratch AS dist
COPY --from=build /out /

# The load generator alone: --target loadtest.
FROM scratch AS loadtest
COPY --from=dist /passwd /group /etc/
COPY --from=dist /loadtest /usr/local/bin/loadtest
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/loadtest"]

# The demo runner (docker-compose.yml's demo service): drives the stack's
# replicas through nginx with the load generator beside it, writes the page of
# the rounds to /data/demo.html.
FROM scratch AS demo
COPY --from=dist /passwd /group /etc/
COPY --from=dist --chown=65532:65532 /data /data
COPY --from=dist --chown=65532:65532 /keys /keys
COPY --from=dist /loadtest /demo /usr/local/bin/
USER 65532:65532
WORKDIR /data
ENV TMPDIR=/data
ENTRYPOINT ["/usr/local/bin/demo"]

# The service, the default target (last, so that a plain "docker build" makes it).
FROM scratch AS service
COPY --from=dist /ca-certificates.crt /etc/ssl/certs/
COPY --from=dist /passwd /group /etc/
COPY --from=dist --chown=65532:65532 /data /data
COPY --from=dist --chown=65532:65532 /keys /keys
COPY --from=dist /stockguard /usr/local/bin/stockguard
USER 65532:65532
WORKDIR /data
EXPOSE 8080
ENV STOCKGUARD_ADDR=:8080 STOCKGUARD_LOG_FORMAT=json
ENTRYPOINT ["/usr/local/bin/stockguard"]
CMD ["serve"]
