INSERT INTO "sluice"."checkpoint" (stream, lane, seq, position, applied, updated_at, last_position, lanes, routing)
VALUES ($1, $2::integer, $3::bigint, $4, $5::bigint, coalesce($6::timestamptz, now()), $7, $8::integer, $9)
ON CONFLICT (stream, lane) DO UPDATE SET seq = EXCLUDED.seq, position = EXCLUDED.position, applied = EXCLUDED.applied, updated_at = EXCLUDED.updated_at, last_position = EXCLUDED.last_position, lanes = EXCLUDED.lanes, routing = EXCLUDED.routing
