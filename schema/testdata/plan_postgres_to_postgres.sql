-- sluice schema plan: postgres source, PostgreSQL target

-- table public.customers (target public.customers)
CREATE TABLE IF NOT EXISTS "public"."customers" (
  "id" bigint NOT NULL,
  "email" character varying(200) NOT NULL,
  "name" text,
  PRIMARY KEY ("id")
);

-- table public.every_type (target public.every_type)
-- note: column id is not an identity/auto-increment column on the target: its values come from the source
-- note: foreign key every_type_elsewhere_fkey is not created: it references public.elsewhere, which is not among the stream's tables
CREATE TYPE public.mood AS ENUM ('sad', 'o''k', 'happy');
CREATE DOMAIN public.posint AS integer CHECK ((VALUE > 0));
CREATE TABLE IF NOT EXISTS "public"."every_type" (
  "id" bigint NOT NULL,
  "customer_id" bigint,
  "i2" smallint,
  "i4" integer NOT NULL DEFAULT '0',
  "i8" bigint,
  "num" numeric(12,2) DEFAULT '1.50',
  "num_wide" numeric(65,30),
  "r" real,
  "d" double precision,
  "b" boolean DEFAULT 'true',
  "code" character varying(40) NOT NULL DEFAULT 'it''s',
  "long_vc" character varying(1000),
  "huge_vc" character varying(20000),
  "unbounded_vc" character varying,
  "ch" character(6),
  "t" text COLLATE "C",
  "by" bytea DEFAULT '\x00ff',
  "u" uuid DEFAULT gen_random_uuid(),
  "dt" date DEFAULT '2024-02-29',
  "ts" timestamp(3) without time zone,
  "tstz" timestamp with time zone DEFAULT now(),
  "tm" time without time zone,
  "j" json,
  "jb" jsonb,
  "iv" interval,
  "arr" integer[],
  "addr" inet,
  "mood" public.mood,
  "moods" public.mood[],
  "qty" public.posint,
  "doubled" integer GENERATED ALWAYS AS ((i4 * 2)) STORED,
  "code_len" integer GENERATED ALWAYS AS (char_length((code)::text)) STORED,
  "halved" numeric GENERATED ALWAYS AS ((num / (2)::numeric)) STORED,
  PRIMARY KEY ("id")
);

-- after the initial copy: unique keys and secondary indexes
ALTER TABLE "public"."customers" ADD CONSTRAINT "customers_email_key" UNIQUE ("email");
CREATE UNIQUE INDEX IF NOT EXISTS every_type_code_key ON public.every_type USING btree (code);
CREATE INDEX IF NOT EXISTS every_type_customer_idx ON public.every_type USING btree (customer_id, dt);
CREATE INDEX IF NOT EXISTS every_type_t_idx ON public.every_type USING btree (t);
CREATE UNIQUE INDEX IF NOT EXISTS every_type_t_key ON public.every_type USING btree (t);
CREATE INDEX IF NOT EXISTS every_type_jb_idx ON public.every_type USING gin (jb);
CREATE INDEX IF NOT EXISTS every_type_lower_idx ON public.every_type USING btree (lower(code));
CREATE INDEX IF NOT EXISTS every_type_code_len_idx ON public.every_type USING btree (code_len);
CREATE INDEX IF NOT EXISTS every_type_halved_idx ON public.every_type USING btree (halved);

-- after the initial copy: foreign keys
ALTER TABLE "public"."every_type" ADD CONSTRAINT "every_type_customer_fkey" FOREIGN KEY ("customer_id") REFERENCES "public"."customers" ("id") ON DELETE CASCADE ON UPDATE NO ACTION NOT VALID;
ALTER TABLE "public"."every_type" VALIDATE CONSTRAINT "every_type_customer_fkey";
