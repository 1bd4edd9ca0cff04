INSERT INTO `sluice_checkpoint` (`stream`, `seq`, `position`, `applied`, `updated_at`)
VALUES ('s''1', 7, 'binlog:mysql-bin.000003:4', 1000, '2026-11-30 07:00:00.123456')
ON DUPLICATE KEY UPDATE `seq` = VALUES(`seq`), `position` = VALUES(`position`), `applied` = VALUES(`applied`), `updated_at` = VALUES(`updated_at`)
