# xserve image: the server binary plus exactly one PJRT plugin.
#
#   docker build -t xserve:cpu .                          # XLA CPU plugin (default)
#   docker build --build-arg PJRT=tpu  -t xserve:tpu .    # libtpu, for Cloud TPU VMs
#   docker build --build-arg PJRT=cuda -t xserve:cuda .   # JAX's CUDA 12 PJRT plugin
#   docker run --rm -p 8080:8080 -p 4222:4222 -v $PWD/examples/models:/models:ro xserve:cpu
#
# The plugins are PyPI wheels pinned by version and sha256 in cmd/pjrt-fetch.
# The CUDA plugin needs the CUDA runtime libraries (cuDNN, cuBLAS, ...) and the
# NVIDIA driver at run time: build it on a CUDA runtime base with
# --build-arg RUNTIME_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 and
# run it with --gpus all (docs/DEPLOY.md).
ARG GO_IMAGE=golang:1.26-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# The binary: the same for every variant, so its layers are shared.
FROM ${GO_IMAGE} AS build
# Marks the build stages' images, which make docker-test removes afterwards.
LABEL org.xserve.build-stage=1
ENV CGO_ENABLED=1 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/xserve ./cmd/xserve

# The one PJRT plugin the PJRT build argument names.
FROM ${GO_IMAGE} AS plugin
LABEL org.xserve.build-stage=1
ENV GOFLAGS=-buildvcs=false GOTOOLCHAIN=local
WORKDIR /src
COPY go.mod go.sum ./
COPY cmd/pjrt-fetch/ cmd/pjrt-fetch/
COPY cpukernels/ cpukernels/
ARG PJRT=cpu
# The CPU variant also gets xserve's CPU kernel library (cpukernels/: oneDNN
# convolutions as XLA custom calls), built here against the pinned oneDNN
# wheels, with libdnnl.so.3 and this image's libgomp.so.1 beside it: the
# pjrt package loads it from the plugin's directory (docs/CPU-KERNELS.md).
# The wheels' libraries carry their symbol tables (a third of the CPU plugin):
# stripped, the image is that much leaner and the plugin works the same.
RUN go run ./cmd/pjrt-fetch -platform "${PJRT}" -dest /out/pjrt \
 && if [ "${PJRT}" = cpu ]; then \
      go run ./cmd/pjrt-fetch -onednn /tmp/onednn \
      && BUNDLE_GOMP=1 cpukernels/build.sh /tmp/onednn /out/pjrt \
      && rm -rf /tmp/onednn; \
    fi \
 && strip --strip-unneeded /out/pjrt/*.so*

FROM ${RUNTIME_IMAGE}
ARG PJRT=cpu
# A fixed non-root uid, so that volumes can be prepared for it (chown 10001).
RUN groupadd --system --gid 10001 xserve \
 && useradd --system --uid 10001 --gid xserve --home-dir /var/lib/xserve --create-home --shell /usr/sbin/nologin xserve \
 && mkdir -p /models /var/cache/xserve/compile \
 && chown -R xserve:xserve /var/cache/xserve
COPY --from=plugin /out/pjrt/ /opt/xserve/pjrt/
COPY --from=build /out/xserve /usr/local/bin/xserve
ENV XSERVE_PJRT_PLUGIN=/opt/xserve/pjrt/plugin.so \
    XSERVE_CACHE=/var/cache/xserve \
    XSERVE_PJRT=${PJRT}
USER xserve
WORKDIR /var/lib/xserve
# 8080: HTTP (REST, Open Inference Protocol v2, /metrics); 8001: KServe v2 gRPC;
# 4222: the embedded NATS server.
EXPOSE 8080 8001 4222
VOLUME ["/var/cache/xserve"]
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["xserve", "health", "--url", "http://127.0.0.1:8080/v2/health/ready"]
# The embedded NATS server listens on all interfaces inside the container (the
# default outside one is 127.0.0.1); with --nats-url the replica joins a cluster.
ENTRYPOINT ["xserve", "serve", "--model-repo", "/models", "--compile-cache", "/var/cache/xserve/compile", "--nats-listen", "0.0.0.0:4222"]
