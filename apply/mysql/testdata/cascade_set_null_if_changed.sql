UPDATE `uses` AS `x0`
JOIN `codes` AS `x1` ON `x0`.`code` = `x1`.`code`
SET `x0`.`code` = NULL
WHERE `x1`.`id` = 1 AND `x1`.`region` = 'eu' AND NOT (`x1`.`code` <=> 'O''Neil')
