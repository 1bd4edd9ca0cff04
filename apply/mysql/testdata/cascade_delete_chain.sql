DELETE `x0` FROM `shop`.`order_lines` AS `x0`
JOIN `shop`.`orders` AS `x1` ON `x0`.`order_id` = `x1`.`id`
WHERE `x1`.`customer_id` = 7
