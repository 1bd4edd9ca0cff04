CREATE SCHEMA IF NOT EXISTS "sluice";
CREATE TABLE IF NOT EXISTS "sluice"."checkpoint" (
	stream text NOT NULL,
	lane integer NOT NULL DEFAULT 0,
	seq bigint NOT NULL,
	position text NOT NULL,
	applied bigint NOT NULL,
	updated_at timestamptz NOT NULL,
	last_position text,
	lanes integer,
	routing text,
	PRIMARY KEY (stream, lane)
);
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_attribute WHERE attrelid = '"sluice"."checkpoint"'::regclass AND attname = 'lane' AND NOT attisdropped) THEN
		ALTER TABLE "sluice"."checkpoint" ADD COLUMN lane integer NOT NULL DEFAULT 0, ADD COLUMN last_position text,
			ADD COLUMN lanes integer, ADD COLUMN routing text;
		EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', '"sluice"."checkpoint"',
			(SELECT conname FROM pg_constraint WHERE conrelid = '"sluice"."checkpoint"'::regclass AND contype = 'p'));
		ALTER TABLE "sluice"."checkpoint" ADD PRIMARY KEY (stream, lane);
	END IF;
END $$
