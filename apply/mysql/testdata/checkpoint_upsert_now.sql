INSERT INTO `sluice_checkpoint` (`stream`, `seq`, `position`, `applied`, `updated_at`)
VALUES ('s', 1, '(none)', 0, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE `seq` = VALUES(`seq`), `position` = VALUES(`position`), `applied` = VALUES(`applied`), `updated_at` = VALUES(`updated_at`)
