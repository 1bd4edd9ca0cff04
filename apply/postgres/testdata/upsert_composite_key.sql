INSERT INTO "public"."order_lines" ("order_id", "line", "sku")
SELECT u."order_id"::"pg_catalog"."int8", u."line"::"pg_catalog"."int4", u."sku"::"pg_catalog"."text"
FROM unnest($1::int8[], $2::int4[], $3::text[]) AS u("order_id", "line", "sku")
ON CONFLICT ("order_id", "line") DO UPDATE SET "sku" = EXCLUDED."sku"
