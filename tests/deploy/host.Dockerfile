# A stand-in for a fresh Debian 12 VM that Ansible manages: systemd as PID 1, python3 and python3-apt, man-db
# (as on a VM: `man tenure` must show the package's page).
# The packages the roles install (PostgreSQL 15, PgBouncer, etcd, HAProxy) are downloaded into apt's cache here, once
# per image build, so every run of the roles installs them for real without fetching them again.
FROM debian:bookworm
ENV container=docker DEBIAN_FRONTEND=noninteractive
COPY apt/ /etc/apt/
RUN if [ -f /etc/apt/sources.list.d/debian.sources ]; then rm -f /etc/apt/sources.list; fi \
 && apt-get update \
 && apt-get install -y --no-install-recommends systemd systemd-sysv dbus python3 python3-apt iproute2 procps man-db \
 && apt-get install -y --no-install-recommends --download-only postgresql-15 postgresql-client-15 pgbouncer \
      etcd-server etcd-client haproxy logrotate \
 && systemctl mask getty.target console-getty.service systemd-logind.service systemd-udevd.service \
      systemd-udev-trigger.service systemd-remount-fs.service systemd-firstboot.service \
      sys-kernel-debug.mount sys-kernel-tracing.mount dev-hugepages.mount \
 && mkdir -p /etc/systemd/system/haproxy.service.d \
 && printf '# No mount namespaces in an unprivileged container\n[Service]\nBindReadOnlyPaths=\n' \
      > /etc/systemd/system/haproxy.service.d/container.conf
STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
