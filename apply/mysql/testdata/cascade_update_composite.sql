UPDATE `line_notes` AS `x0`
JOIN `order_lines` AS `x1` ON `x0`.`order_id` = `x1`.`order_id` AND `x0`.`line_no` = `x1`.`line_no`
JOIN `orders` AS `x2` ON `x1`.`order_id` = `x2`.`id`
SET `x0`.`order_id` = 5031
WHERE `x2`.`id` = 31
