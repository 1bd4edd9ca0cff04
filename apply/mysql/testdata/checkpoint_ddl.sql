CREATE TABLE IF NOT EXISTS `sluice_checkpoint` (
	`stream` VARCHAR(255) NOT NULL,
	`lane` INT NOT NULL DEFAULT 0,
	`seq` BIGINT UNSIGNED NOT NULL,
	`position` TEXT NOT NULL,
	`applied` BIGINT UNSIGNED NOT NULL,
	`updated_at` DATETIME(6) NOT NULL,
	`last_position` TEXT NULL,
	`lanes` INT NULL,
	`routing` TEXT NULL,
	PRIMARY KEY (`stream`, `lane`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin
