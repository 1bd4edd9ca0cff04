UPDATE `order_lines` AS t JOIN (SELECT NULL AS `order_id`, NULL AS `line` FROM DUAL WHERE FALSE
UNION ALL SELECT 1, 1
UNION ALL SELECT 1, 2) AS u ON t.`order_id` = u.`order_id` AND t.`line` = u.`line`
SET t.`order_id` = t.`order_id`;
SELECT IF((SELECT COUNT(*) FROM `order_lines` WHERE (`order_id`, `line`) IN ((1, 1), (1, 2))) = 2, 0, (SELECT 1 UNION ALL SELECT 2)) INTO @sluice_found
