INSERT INTO "public"."small" ("id", "note")
SELECT u."id"::"pg_catalog"."int2", u."note"::"pg_catalog"."text"
FROM unnest($1::int2[], $2::text[]) AS u("id", "note")
ON CONFLICT ("id") DO UPDATE SET "note" = EXCLUDED."note"
