DELETE FROM "shop"."order_lines" AS "x0"
USING "shop"."orders" AS "x1"
WHERE "x0"."order_id" = "x1"."id" AND "x1"."customer_id" = $1::text::"pg_catalog"."int8"
