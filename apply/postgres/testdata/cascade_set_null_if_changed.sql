UPDATE "uses" AS "x0"
SET "code" = NULL
FROM "codes" AS "x1"
WHERE "x0"."code" = "x1"."code" AND "x1"."id" = $1::text::"pg_catalog"."int8" AND "x1"."region" = $2::text::"pg_catalog"."text" AND ("x1"."code") IS DISTINCT FROM ($3::text::"pg_catalog"."text")
