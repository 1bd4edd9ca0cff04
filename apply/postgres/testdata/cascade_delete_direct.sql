DELETE FROM "shop"."orders" AS "x0"
WHERE "x0"."customer_id" = $1::text::"pg_catalog"."int8"
