INSERT INTO "public"."orders" ("id", "customer", "total", "tags", "placed_at")
SELECT u."id"::"pg_catalog"."int8", u."customer"::"pg_catalog"."varchar", u."total"::"pg_catalog"."numeric", u."tags"::"pg_catalog"."_text", u."placed_at"::"pg_catalog"."timestamptz"
FROM unnest($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u("id", "customer", "total", "tags", "placed_at")
ON CONFLICT ("id") DO UPDATE SET "customer" = EXCLUDED."customer", "total" = EXCLUDED."total", "tags" = EXCLUDED."tags", "placed_at" = EXCLUDED."placed_at"
