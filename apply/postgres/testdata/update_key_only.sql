WITH w AS (UPDATE "public"."order_lines" AS t SET "order_id" = t."order_id"
FROM unnest($1::int8[], $2::int4[]) AS u("order_id", "line")
WHERE t."order_id" = u."order_id"::"pg_catalog"."int8" AND t."line" = u."line"::"pg_catalog"."int4"
RETURNING 1)
SELECT 1 / (count(*) = cardinality($1::int8[]))::int FROM w
