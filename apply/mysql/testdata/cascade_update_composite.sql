UPDATE `line_notes` AS `x0`
JOIN `order_lines` AS `x1` ON `x0`.`order_id` = `x1`.`order_id` AND `x0`.`line_no` = `x1`.`line_no`
SET `x0`.`order_id` = 5031
WHERE `x1`.`order_id` = 31
