WITH w AS (UPDATE "public"."orders" AS t SET "total" = u."total"::"pg_catalog"."numeric", "placed_at" = u."placed_at"::"pg_catalog"."timestamptz"
FROM unnest($1::int8[], $2::text[], $3::text[]) AS u("id", "total", "placed_at")
WHERE t."id" = u."id"::"pg_catalog"."int8"
RETURNING 1)
SELECT 1 / (count(*) = cardinality($1::int8[]))::int FROM w
