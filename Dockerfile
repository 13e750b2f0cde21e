# durable-sessions worker image.
#
#   docker build -t durable-sessions .
#   docker run -e TEMPORAL_ADDRESS=temporal.example:7233 -v snapshots:/var/lib/durable-sessions/snapshots durable-sessions
#
# Configuration is the environment only (src/config.ts); docker-compose.yml shows a complete deployment.

# --- build: compile TypeScript, then keep only the production dependencies -----------------------------------
FROM node:20-bookworm-slim AS build
WORKDIR /app

# zstd-napi (optional: zstd chunk compression, faster than Brotli) compiles at install against Node's headers; without
# a toolchain it is skipped and the worker compresses with Brotli. Every worker sharing a store needs the same choice.
RUN apt-get update \
  && apt-get install -y --no-install-recommends python3 make g++ \
  && rm -rf /var/lib/apt/lists/*
ENV npm_config_nodedir=/usr/local

# Dependencies first, so source edits reuse this layer. The lockfile pins every package, native ones included.
# (The package's prepare script finds no sources here and builds nothing: the build is the step after them.)
COPY package.json package-lock.json ./
RUN npm ci

COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

# --- runtime ----------------------------------------------------------------------------------------------------
FROM node:20-bookworm-slim AS runtime

# tini reaps the workspace processes that sessions start and forwards SIGTERM for a graceful worker shutdown;
# CA certificates let the worker reach a Temporal frontend over TLS.
RUN apt-get update \
  && apt-get install -y --no-install-recommends tini ca-certificates \
  && rm -rf /var/lib/apt/lists/*

ENV NODE_ENV=production \
  DS_DATA_DIR=/var/lib/durable-sessions

WORKDIR /app
# Application files stay owned by root: the worker cannot modify its own code.
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist

# Sessions' workspaces live here, and the snapshots too with the filesystem store (the default without
# DS_SNAPSHOT_STORE). The directories exist in the image so that a fresh named volume mounted on the data directory or
# the snapshots one starts out owned by the worker's user.
RUN mkdir -p /var/lib/durable-sessions/snapshots /var/lib/durable-sessions/workspaces \
  && chown -R node:node /var/lib/durable-sessions

# The official image's unprivileged `node` user, by number so that orchestrators can verify it is not root.
USER 1000:1000

ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "dist/worker.js"]
