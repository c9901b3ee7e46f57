#!/bin/sh
# docker-compose only: the postgres image runs this once, when it initializes an empty data directory. It creates
# the application role the web and workers connect as; the image's POSTGRES_USER owns the tables (it runs the
# migrations). On Kubernetes the DBA creates both roles (docs/deploy.md, "Database roles").
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" -v app_password="$POSTGRES_APP_PASSWORD" <<'SQL'
CREATE ROLE portal_app LOGIN PASSWORD :'app_password';
SQL
