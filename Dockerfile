# The `agentplane` binary (controller and node agent) on a small Debian.
#
#   docker build -t ghcr.io/agentplane/agentplane:0.1.0 .

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# The caches speed up rebuilds (BuildKit); the binary is copied out of the cached
# target directory because a cache mount does not end up in the image.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p agentplane \
    && cp target/release/agentplane /usr/local/bin/agentplane

FROM debian:bookworm-slim
# bash and git: agents and terminals run in the node agent's container and expect them.
# node and npm: the node agent installs the agent CLIs with npm (into its data
# directory), and they run on node; a managed Sandbox's Pod runs this image.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bash ca-certificates git nodejs npm \
    && rm -rf /var/lib/apt/lists/*
# A fixed numeric user, the one manifests/ names in runAsUser (a managed Sandbox's Pod
# runs as 65532 instead, with HOME on an emptyDir: nothing there needs this account).
RUN groupadd --gid 10001 agentplane \
    && useradd --uid 10001 --gid 10001 --create-home --shell /bin/bash agentplane \
    && install -d -o 10001 -g 10001 /var/lib/agentplane
COPY --from=build /usr/local/bin/agentplane /usr/local/bin/agentplane
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/agentplane"]
