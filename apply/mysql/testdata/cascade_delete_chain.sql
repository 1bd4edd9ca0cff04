DELETE `x0` FROM `shop`.`order_lines` AS `x0`
JOIN `shop`.`orders` AS `x1` ON `x0`.`order_id` = `x1`.`id`
JOIN `shop`.`customers` AS `x2` ON `x1`.`customer_id` = `x2`.`id`
WHERE `x2`.`id` = 7
