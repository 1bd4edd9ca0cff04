INSERT INTO "sluice"."checkpoint" (stream, seq, position, applied, updated_at)
VALUES ($1, $2::bigint, $3, $4::bigint, coalesce($5::timestamptz, now()))
ON CONFLICT (stream) DO UPDATE SET seq = EXCLUDED.seq, position = EXCLUDED.position, applied = EXCLUDED.applied, updated_at = EXCLUDED.updated_at
