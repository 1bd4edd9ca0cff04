INSERT INTO `sluice_checkpoint` (`stream`, `lane`, `seq`, `position`, `applied`, `updated_at`, `last_position`, `lanes`, `routing`)
VALUES ('s''1', 0, 7, 'binlog:mysql-bin.000003:4', 1000, '2026-11-30 07:00:00.123456', 'binlog:mysql-bin.000003:4', 1, NULL)
ON DUPLICATE KEY UPDATE `seq` = VALUES(`seq`), `position` = VALUES(`position`), `applied` = VALUES(`applied`), `updated_at` = VALUES(`updated_at`), `last_position` = VALUES(`last_position`), `lanes` = VALUES(`lanes`), `routing` = VALUES(`routing`)
