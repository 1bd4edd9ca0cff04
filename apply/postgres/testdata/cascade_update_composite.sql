UPDATE "line_notes" AS "x0"
SET "order_id" = $1::text::"pg_catalog"."int8"
FROM "order_lines" AS "x1"
WHERE "x0"."order_id" = "x1"."order_id" AND "x0"."line_no" = "x1"."line_no" AND "x1"."order_id" = $2::text::"pg_catalog"."int8"
