UPDATE `shop`.`orders` AS t JOIN (SELECT NULL AS `id`, NULL AS `total`, NULL AS `placed_at` FROM DUAL WHERE FALSE
UNION ALL SELECT 1, 12.50, '2024-01-02 03:04:05.000000') AS u ON t.`id` = u.`id`
SET t.`total` = u.`total`, t.`placed_at` = u.`placed_at`;
SELECT IF((SELECT COUNT(*) FROM `shop`.`orders` WHERE `id` IN (1)) = 1, 0, (SELECT 1 UNION ALL SELECT 2)) INTO @sluice_found;
UPDATE `shop`.`orders` AS t JOIN (SELECT NULL AS `id`, NULL AS `total`, NULL AS `placed_at` FROM DUAL WHERE FALSE
UNION ALL SELECT 2, -0.01, NULL) AS u ON t.`id` = u.`id`
SET t.`total` = u.`total`, t.`placed_at` = u.`placed_at`;
SELECT IF((SELECT COUNT(*) FROM `shop`.`orders` WHERE `id` IN (2)) = 1, 0, (SELECT 1 UNION ALL SELECT 2)) INTO @sluice_found;
UPDATE `shop`.`orders` AS t JOIN (SELECT NULL AS `id`, NULL AS `total`, NULL AS `placed_at` FROM DUAL WHERE FALSE
UNION ALL SELECT 18446744073709551615, 1e-5, '2024-01-02 03:04:05.123456') AS u ON t.`id` = u.`id`
SET t.`total` = u.`total`, t.`placed_at` = u.`placed_at`;
SELECT IF((SELECT COUNT(*) FROM `shop`.`orders` WHERE `id` IN (18446744073709551615)) = 1, 0, (SELECT 1 UNION ALL SELECT 2)) INTO @sluice_found
