-- sluice schema plan: mysql source, MariaDB target

-- table customers (target customers)
CREATE TABLE IF NOT EXISTS `customers` (
  `id` bigint(20) NOT NULL AUTO_INCREMENT,
  `email` varchar(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- table every_type (target every_type)
CREATE TABLE IF NOT EXISTS `every_type` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `customer_id` bigint(20),
  `ti` tinyint(4),
  `flag` tinyint(1) NOT NULL DEFAULT '0',
  `si` smallint(5) unsigned,
  `mi` mediumint(9),
  `i` int(11) NOT NULL DEFAULT '0',
  `iu` int(10) unsigned,
  `bu` bigint(20) unsigned,
  `dec` decimal(12,2) DEFAULT '1.50',
  `f` float,
  `dbl` double,
  `c` char(6) CHARACTER SET latin1 COLLATE latin1_swedish_ci,
  `vc` varchar(40) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT 'it''s',
  `tt` tinytext CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
  `tx` text CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
  `mt` mediumtext CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
  `lt` longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
  `js` json,
  `bin` binary(16),
  `vb` varbinary(200),
  `bl` blob,
  `lb` longblob,
  `bt` bit(3),
  `dt` date,
  `dtm` datetime(6),
  `ts` timestamp(3) DEFAULT current_timestamp(3),
  `tm` time(2),
  `y` year(4),
  `en` enum('a','b''c') CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
  `st` set('x','y') CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci,
  `u` uuid,
  `total` int(11) AS (`i` * 2) STORED,
  `vc_len` int(11) AS (char_length(`vc`)) VIRTUAL,
  `f_twice` double AS (`f` * 2) VIRTUAL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci;

-- after the initial copy: unique keys and secondary indexes
CREATE UNIQUE INDEX `email` ON `customers` (`email`);
CREATE UNIQUE INDEX `vc` ON `every_type` (`vc`);
CREATE INDEX `tx_prefix` ON `every_type` (`tx`(20), `dt`);
CREATE FULLTEXT INDEX `tt_words` ON `every_type` (`tt`);
CREATE INDEX `customer_id` ON `every_type` (`customer_id`);
CREATE INDEX `vc_len` ON `every_type` (`vc_len`);
CREATE INDEX `f_twice` ON `every_type` (`f_twice`);

-- after the initial copy: foreign keys
ALTER TABLE `every_type` ADD CONSTRAINT `every_type_ibfk_1` FOREIGN KEY (`customer_id`) REFERENCES `customers` (`id`) ON DELETE CASCADE ON UPDATE RESTRICT;
