INSERT INTO `sluice_checkpoint` (`stream`, `lane`, `seq`, `position`, `applied`, `updated_at`, `last_position`, `lanes`, `routing`)
VALUES ('s', 0, 1, '(none)', 0, UTC_TIMESTAMP(6), '(none)', 1, NULL)
ON DUPLICATE KEY UPDATE `seq` = VALUES(`seq`), `position` = VALUES(`position`), `applied` = VALUES(`applied`), `updated_at` = VALUES(`updated_at`), `last_position` = VALUES(`last_position`), `lanes` = VALUES(`lanes`), `routing` = VALUES(`routing`)
