-- sluice schema plan: mysql source, PostgreSQL target

-- table customers (target customers)
-- note: column id is not an identity/auto-increment column on the target: its values come from the source
CREATE TABLE IF NOT EXISTS "customers" (
  "id" bigint NOT NULL,
  "email" varchar(200) COLLATE "C" NOT NULL,
  PRIMARY KEY ("id")
);

-- table every_type (target every_type)
-- note: column id is not an identity/auto-increment column on the target: its values come from the source
-- note: column ts's default current_timestamp(3) is not created: it is not a constant, and sluice writes every column's value from the source
-- note: generated column total is created as generated, its expression translated from mysql (`i` * 2) to postgres (("i")::bigint * 2)
-- note: generated column vc_len is created as generated, its expression translated from mysql (char_length(`vc`)) to postgres (char_length("vc"))
-- note: generated column f_twice is created as a plain column holding the source's values: its expression (`f` * 2) cannot be translated safely: column f of type float, whose arithmetic the engines may compute differently
-- note: index tt_words is not created: it is a FULLTEXT index, which PostgreSQL has not
CREATE TABLE IF NOT EXISTS "every_type" (
  "id" numeric(20,0) NOT NULL,
  "customer_id" bigint,
  "ti" smallint,
  "flag" smallint NOT NULL DEFAULT '0',
  "si" integer,
  "mi" integer,
  "i" integer NOT NULL DEFAULT '0',
  "iu" bigint,
  "bu" numeric(20,0),
  "dec" numeric(12,2) DEFAULT '1.50',
  "f" real,
  "dbl" double precision,
  "c" varchar(6),
  "vc" varchar(40) COLLATE "C" NOT NULL DEFAULT 'it''s',
  "tt" text,
  "tx" text,
  "mt" text,
  "lt" text,
  "js" json,
  "bin" bytea,
  "vb" bytea,
  "bl" bytea,
  "lb" bytea,
  "bt" bit(3),
  "dt" date,
  "dtm" timestamp(6) without time zone,
  "ts" timestamp(3) with time zone,
  "tm" interval,
  "y" smallint,
  "en" text,
  "st" text,
  "u" text,
  "total" integer GENERATED ALWAYS AS (("i")::bigint * 2) STORED,
  "vc_len" integer GENERATED ALWAYS AS (char_length("vc")) STORED,
  "f_twice" double precision,
  PRIMARY KEY ("id")
);

-- after the initial copy: unique keys and secondary indexes
CREATE UNIQUE INDEX IF NOT EXISTS "customers_email" ON "customers" ("email");
CREATE UNIQUE INDEX IF NOT EXISTS "every_type_vc" ON "every_type" ("vc");
CREATE INDEX IF NOT EXISTS "every_type_tx_prefix" ON "every_type" ("tx", "dt");
CREATE INDEX IF NOT EXISTS "every_type_customer_id" ON "every_type" ("customer_id");
CREATE INDEX IF NOT EXISTS "every_type_vc_len" ON "every_type" ("vc_len");
CREATE INDEX IF NOT EXISTS "every_type_f_twice" ON "every_type" ("f_twice");

-- after the initial copy: foreign keys
ALTER TABLE "every_type" ADD CONSTRAINT "every_type_ibfk_1" FOREIGN KEY ("customer_id") REFERENCES "customers" ("id") ON DELETE CASCADE ON UPDATE RESTRICT NOT VALID;
ALTER TABLE "every_type" VALIDATE CONSTRAINT "every_type_ibfk_1";
