INSERT INTO "public"."orders" ("id", "total", "placed_at")
SELECT u."id"::"pg_catalog"."int8", u."total"::"pg_catalog"."numeric", u."placed_at"::"pg_catalog"."timestamptz"
FROM unnest($1::int8[], $2::text[], $3::text[]) AS u("id", "total", "placed_at")
ON CONFLICT ("id") DO UPDATE SET "total" = EXCLUDED."total", "placed_at" = EXCLUDED."placed_at"
