INSERT INTO "public"."g" ("id", "price", "qty", "doc")
SELECT u."id"::"pg_catalog"."int4", u."price"::"pg_catalog"."numeric", u."qty"::"pg_catalog"."int4", u."doc"::"pg_catalog"."jsonb"
FROM unnest($1::int4[], $2::text[], $3::int4[], $4::text[]) AS u("id", "price", "qty", "doc")
ON CONFLICT ("id") DO UPDATE SET "price" = EXCLUDED."price", "qty" = EXCLUDED."qty", "doc" = EXCLUDED."doc";
WITH u AS (UPDATE "public"."g" SET "id" = $1::text::"pg_catalog"."int4", "price" = $2::text::"pg_catalog"."numeric", "qty" = $3::text::"pg_catalog"."int4", "doc" = $4::text::"pg_catalog"."jsonb"
WHERE "id" = $5::text::"pg_catalog"."int4"
RETURNING 1)
SELECT 1 / count(*) FROM u;
-- ["30" "10.51" "5" "{\"x\": 1}" "3"]
