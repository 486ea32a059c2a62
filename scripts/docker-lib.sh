# Sourced by scripts/docker-image and tests/deploy/run: Debian's Docker engine started if needed and a local
# debian:bookworm base image made with debootstrap when no registry has one (recipe:
# /work/shared/reference/containers.md). Needs root and scripts/install-deps.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin:$PATH   # Debian's docker client first (matches the engine), not /usr/local/bin
DOCKERD_PID=""                               # set only when this script started the engine

engine_start() {
  if docker info >/dev/null 2>&1; then return 0; fi
  local log=${TMPDIR:-/tmp}/tenure-dockerd.log
  dockerd >"$log" 2>&1 &
  DOCKERD_PID=$!
  local i
  for i in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    kill -0 "$DOCKERD_PID" 2>/dev/null || { cat "$log" >&2; return 1; }
    sleep 0.5
  done
  echo "dockerd did not answer in 30 s (log: $log)" >&2
  return 1
}

# Stops the engine only if this script started it, by its PID.
engine_stop() {
  if [ -n "$DOCKERD_PID" ]; then
    kill -TERM "$DOCKERD_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    DOCKERD_PID=""
  fi
}

# debian:bookworm from debootstrap, with the host's apt mirror, unless the engine already has one.
base_image() {
  if docker image inspect debian:bookworm >/dev/null 2>&1; then return 0; fi
  local mirror rootfs
  mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  rootfs=$(mktemp -d /tmp/tenure-rootfs.XXXXXX)
  echo "making debian:bookworm with debootstrap from $mirror" >&2
  debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >&2
  chroot "$rootfs" apt-get clean
  rm -rf "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import - debian:bookworm >/dev/null
  rm -rf "$rootfs"
}

# The host's apt configuration, copied into a build context (never into git) so that apt inside the
# image uses the same mirror and proxy settings. docker-clean is left out: it deletes downloaded .debs.
apt_context() {
  local dir=$1
  mkdir -p "$dir/apt/sources.list.d" "$dir/apt/apt.conf.d"
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$dir/apt/sources.list.d/"
  fi
  [ -d /etc/apt/apt.conf.d ] && find /etc/apt/apt.conf.d -maxdepth 1 -type f ! -name 'docker-clean' -exec cp {} "$dir/apt/apt.conf.d/" \;
}

# build_image TAG DOCKERFILE [FILE_OR_DIR ...]: a fresh context with the Dockerfile, the apt configuration
# and the given files, built once: an existing TAG whose label matches the inputs' hash is reused.
build_image() {
  local tag=$1 dockerfile=$2; shift 2
  local sum
  sum=$( (cat "$dockerfile"; if [ $# -gt 0 ]; then find "$@" -type f | sort | xargs cat; fi) | sha256sum | cut -c1-16)
  if [ "$(docker image inspect -f '{{index .Config.Labels "tenure.inputs"}}' "$tag" 2>/dev/null)" = "$sum" ]; then
    return 0
  fi
  local ctx
  ctx=$(mktemp -d /tmp/tenure-ctx.XXXXXX)
  apt_context "$ctx"
  cp "$dockerfile" "$ctx/Dockerfile"
  local f
  for f in "$@"; do cp -r "$f" "$ctx/"; done
  echo "building $tag" >&2
  docker build -q --label "tenure.inputs=$sum" -t "$tag" "$ctx" >&2
  rm -rf "$ctx"
}

# The package layer of docker/Dockerfile (its `base` stage: PostgreSQL, etcd, HAProxy from apt), built
# ahead so that scripts/docker-image later only adds the tenure package on top of the cached layer.
prepare_compose_base() {
  local ctx
  ctx=$(mktemp -d /tmp/tenure-ctx.XXXXXX)
  apt_context "$ctx"
  cp docker/Dockerfile "$ctx/Dockerfile"
  docker build -q --target base -t tenure-compose-base "$ctx" >&2
  local rc=$?
  rm -rf "$ctx"
  return $rc
}
