#!/usr/bin/env bash
# Makes sure the database server binaries the test harness starts are
# installed: PostgreSQL (initdb, postgres) and MariaDB (mariadb-install-db,
# mariadbd), and PgBouncer (the PostgreSQL target behind a transaction
# pooler). Installs them with apt-get when run as root; otherwise names the
# packages and fails.
set -euo pipefail

have_pg() {
	local bindir=""
	if command -v pg_config >/dev/null 2>&1; then
		bindir=$(pg_config --bindir 2>/dev/null || true)
	fi
	if [ -n "$bindir" ] && [ -x "$bindir/initdb" ] && [ -x "$bindir/postgres" ]; then
		return 0
	fi
	compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

have_maria() {
	command -v mariadb-install-db >/dev/null 2>&1 && { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; }
}

have_pgbouncer() {
	command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ]
}

missing=()
have_pg || missing+=(postgresql)
have_maria || missing+=(mariadb-server)
have_pgbouncer || missing+=(pgbouncer)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "sluice's test harness needs the database server binaries: install the Debian packages ${missing[*]} (sudo apt-get install ${missing[*]}) and run make again." >&2
	exit 1
fi
echo "installing ${missing[*]} for the test harness…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
# The packages start system-wide servers on the standard ports; the harness
# never uses them, it starts its own instances on free ports.
have_pg && have_maria && have_pgbouncer
