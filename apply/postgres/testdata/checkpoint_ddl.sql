CREATE SCHEMA IF NOT EXISTS "sluice";
CREATE TABLE IF NOT EXISTS "sluice"."checkpoint" (
	stream text PRIMARY KEY,
	seq bigint NOT NULL,
	position text NOT NULL,
	applied bigint NOT NULL,
	updated_at timestamptz NOT NULL
)
