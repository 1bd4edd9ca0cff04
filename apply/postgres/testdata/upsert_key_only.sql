INSERT INTO "public"."tags" ("order_id", "line")
SELECT u."order_id"::"pg_catalog"."int8", u."line"::"pg_catalog"."int4"
FROM unnest($1::int8[], $2::int4[]) AS u("order_id", "line")
ON CONFLICT ("line", "order_id") DO NOTHING
