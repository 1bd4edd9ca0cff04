DELETE FROM "public"."orders"
WHERE "id" IN (SELECT u."id"::"pg_catalog"."int8" FROM unnest($1::int8[]) AS u("id"))
