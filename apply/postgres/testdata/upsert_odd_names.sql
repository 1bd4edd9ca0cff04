INSERT INTO "My ""Schema"""."Tä ble" ("a""b", "ü c")
SELECT u."a""b"::"public"."my ""type""", u."ü c"::"pg_catalog"."bpchar"
FROM unnest($1::text[], $2::text[]) AS u("a""b", "ü c")
ON CONFLICT ("a""b") DO UPDATE SET "ü c" = EXCLUDED."ü c"
