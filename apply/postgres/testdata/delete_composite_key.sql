DELETE FROM "public"."order_lines"
WHERE ("order_id", "line") IN (SELECT u."order_id"::"pg_catalog"."int8", u."line"::"pg_catalog"."int4" FROM unnest($1::text[], $2::text[]) AS u("order_id", "line"))
