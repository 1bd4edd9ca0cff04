-- sluice schema plan: postgres source, MySQL target

-- table public.customers (target customers)
CREATE TABLE IF NOT EXISTS `customers` (
  `id` bigint NOT NULL,
  `email` varchar(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL,
  `name` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_0900_bin;

-- table public.every_type (target every_type)
-- note: column id is not an identity/auto-increment column on the target: its values come from the source
-- note: column u's default gen_random_uuid() is not created: it is not a constant, and sluice writes every column's value from the source
-- note: column tstz's default now() is not created: it is not a constant, and sluice writes every column's value from the source
-- note: generated column doubled is created as generated, its expression translated from postgres ((i4 * 2)) to mysql (`i4` * 2)
-- note: generated column code_len is created as generated, its expression translated from postgres (char_length((code)::text)) to mysql (char_length(`code`))
-- note: generated column halved is not created: the source's stream does not carry generated columns, and its expression ((num / (2)::numeric)) cannot be translated safely: the operator "/"; add it on the target in the target's dialect if you need it
-- note: unique key every_type_t_key is not created: its column t is longtext on the target, and a MySQL index key holds at most 3072 bytes (the target needs no unique key to stay equal: sluice applies only rows the source accepted)
-- note: index every_type_jb_idx is not created: MySQL has no gin index
-- note: index every_type_lower_idx is not created: it has expressions, a predicate or included columns, which only a target of the source's engine can take
-- note: index every_type_halved_idx is not created: its column halved is not created (see above)
-- note: foreign key every_type_elsewhere_fkey is not created: it references public.elsewhere, which is not among the stream's tables
CREATE TABLE IF NOT EXISTS `every_type` (
  `id` bigint NOT NULL,
  `customer_id` bigint,
  `i2` smallint,
  `i4` int NOT NULL DEFAULT '0',
  `i8` bigint,
  `num` decimal(12,2) DEFAULT '1.50',
  `num_wide` decimal(65,30),
  `r` float,
  `d` double,
  `b` tinyint(1) DEFAULT '1',
  `code` varchar(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin NOT NULL DEFAULT 'it''s',
  `long_vc` text CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `huge_vc` mediumtext CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `unbounded_vc` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `ch` char(6) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `t` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `by` longblob DEFAULT (X'00ff'),
  `u` char(36) CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `dt` date DEFAULT '2024-02-29',
  `ts` datetime(3),
  `tstz` datetime(6),
  `tm` time(6),
  `j` json,
  `jb` json,
  `iv` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `arr` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `addr` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `mood` enum('sad','o''k','happy') CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `moods` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `qty` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_0900_bin,
  `doubled` int AS (`i4` * 2) STORED,
  `code_len` int AS (char_length(`code`)) STORED,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_0900_bin;

-- after the initial copy: unique keys and secondary indexes
CREATE UNIQUE INDEX `customers_email_key` ON `customers` (`email`);
CREATE UNIQUE INDEX `every_type_code_key` ON `every_type` (`code`);
CREATE INDEX `every_type_customer_idx` ON `every_type` (`customer_id`, `dt`);
CREATE INDEX `every_type_t_idx` ON `every_type` (`t`(255));
CREATE INDEX `every_type_code_len_idx` ON `every_type` (`code_len`);

-- after the initial copy: foreign keys
ALTER TABLE `every_type` ADD CONSTRAINT `every_type_customer_fkey` FOREIGN KEY (`customer_id`) REFERENCES `customers` (`id`) ON DELETE CASCADE ON UPDATE NO ACTION;
